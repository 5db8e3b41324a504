//! The `local` provider: persistent, isolated sandboxes on the server's own machine — the
//! embedded default, which needs no account.
//!
//! # What a sandbox is
//!
//! A directory tree under [`LocalConfig::root`] (`<root>/<native-id>/fs`) that is the
//! sandbox's own root filesystem. `/workspace` (home and default working directory) and `/tmp`
//! are created with it; whatever a command writes anywhere in it persists across commands and
//! across restarts of the server, until the sandbox is deleted. A small `meta.json` beside it
//! (operation id, creation time, lifetime; written atomically) lets a new process find every
//! sandbox again, and [`find_by_operation_id`](SandboxProvider::find_by_operation_id) scans
//! those files.
//!
//! # How a command is isolated
//!
//! Each command runs in **fresh Linux namespaces** — mount, pid (with its own `/proc`), ipc,
//! uts, and network (no interface but a down loopback, unless [`LocalConfig::allow_network`])
//! — after a `pivot_root` into the sandbox root. The host's system directories (`/usr`,
//! `/bin`, `/lib`, `/lib64`, `/sbin`, `/etc`) are bind-mounted read-only and nosuid; files
//! and directories under `/etc` that other users may not read but the server's uid could
//! (`/etc/shadow`, private keys) are masked; `/dev` is a minimal devfs (null, zero, full,
//! random, urandom, tty, a private devpts). Nothing else of the host is mounted: not the
//! server's data directory, not other sandboxes, not `/root`, `/home`, `/work`, `/var`, the
//! host's `/tmp` or any other writable path.
//!
//! The command itself does not run with the server's privileges:
//!
//! - When the server runs as root, every sandbox gets **its own unprivileged host uid** (from
//!   1 500 000 000 up, recorded in its metadata; its files belong to it), and the command
//!   drops to it (`setpriv`) before anything of the caller's runs. When the server is not
//!   root, commands run as the server's uid in a user namespace.
//! - It then enters a **nested user and mount namespace** (`unshare --user --map-root-user
//!   --mount`), where it is root (uid 0 inside, with capabilities over its own namespaces
//!   only). Mounts copied into a less privileged mount namespace are locked by the kernel:
//!   the command cannot unmount a mask to reveal what it hides, nor remount a read-only bind
//!   read-write. Without this step a root inside could write to the host's `/usr`.
//! - Being an unprivileged uid on the host also keeps it out of the kernel interfaces that
//!   check for uid 0 rather than a capability (`/proc/sys`, `/proc/sysrq-trigger`).
//! - It leads a session of its own (`setsid`): the server's controlling terminal, if it has
//!   one, cannot be opened as `/dev/tty`.
//! - `no_new_privs` is set, so setuid binaries do not raise privileges.
//!
//! pid 1 of the namespace is a small fixed shell script, with the server's uid, that starts
//! the command (passed as a parameter, never spliced into the script) and waits for it. Killing the command's
//! supervisor kills pid 1 (its parent-death signal), and the kernel kills every other process
//! of a pid namespace when its pid 1 dies: a deadline ends the whole tree. Before anything
//! else, pid 1 checks that `/proc` is the namespace's own and the only procfs, and that the
//! system binds and masks are all still mounted (a concurrent command of the same sandbox
//! can write the root hakoniwa builds the mounts in); otherwise the command is not run
//! (exit 125). The caller's environment reaches the command alone: it travels in one inert
//! variable that the command's own shell evaluates inside the nested namespace, never
//! through pid 1, `setsid`, `setpriv` or `unshare` (an `LD_PRELOAD` there would run the
//! caller's code with their privileges), and never on a command line (readable by every
//! host user). A command never runs past its sandbox's lifetime.
//!
//! The namespaces and mounts are set up by the [`hakoniwa`] crate rather than by hand-rolled
//! syscalls: it is a maintained, documented library that does the delicate parts (mount
//! propagation, `pivot_root`, a fresh procfs in the new pid namespace, a minimal devfs,
//! rlimits, `no_new_privs`, closing inherited descriptors) in one place and needs no `unsafe`
//! from us. The steps it does not offer (dropping to the sandbox uid, the nested namespace
//! that locks the mounts, the new session) use util-linux's `setpriv`, `unshare` and
//! `setsid`, which every Debian-like system has (`/usr/bin`). bubblewrap would do all of it,
//! but is not installed by default. hakoniwa forks the server process for each command; the
//! child only runs hakoniwa's setup code before `execve`.
//!
//! hakoniwa is licensed LGPL-3.0-only with the LGPL-3.0 linking exception: a binary may link
//! it statically without shipping the means to relink it (the LGPL's other terms, such as
//! its notice and keeping changes to hakoniwa itself under the LGPL, still apply).
//!
//! Files are read and written from the host side, without a command; lookups are confined
//! to the sandbox root by the kernel (`openat2` with `RESOLVE_BENEATH`): `..`, absolute paths
//! outside, and symlinks (absolute, or relative chains) that leave the root are refused, and
//! a write never goes through a symlink.
//!
//! # Limits, and what is not isolated
//!
//! [`LocalLimits`] bounds each sandbox as a whole, and each process in it:
//!
//! - **cgroup** (server as root, or given a subtree delegated to its uid with
//!   [`LocalConfig::cgroup_parent`]): every command of a sandbox joins the sandbox's own
//!   group (`corral/<native-id>`, cgroup v2, or the v1 `memory`, `pids`, `cpu` and `blkio`
//!   hierarchies on hosts still on the legacy layout) before anything of the caller's runs:
//!   `memory_bytes` in total with swap off, `max_processes` in total, `cpu_weight`,
//!   `cpu_max_millicores`, and [`IoLimits`] on the sandbox's own loop device. A sandbox over
//!   its memory has processes killed by the kernel's OOM killer, inside that sandbox only.
//! - **disk** (server as root): the sandbox's root is an ext4 image of `disk_bytes`,
//!   allocated whole at create and loop-mounted; a full sandbox gets `ENOSPC`, and a create
//!   that would leave less than `disk_reserve_bytes` free on the volume fails.
//! - **seccomp**: the last step before the command loads a filter modelled on the default
//!   profiles of container runtimes (no new user namespaces, keyring, BPF, ptrace, kernel
//!   modules, clocks, …; see the `seccomp` module).
//! - **rlimits** on every process: address space (`memory_bytes`), file size, CPU seconds,
//!   and processes (`RLIMIT_NPROC`, per host uid: per sandbox as root).
//!
//! A part the machine cannot provide (not root, no cgroup controllers, no loop devices, no
//! perl) is logged when the provider starts and reported by [`LocalProvider::containment`];
//! the provider runs without it. Without cgroups (a non-root server with no delegated
//! subtree) processes are limited per command, not per sandbox. The kernel is shared (no VM boundary): a kernel bug reachable
//! through the calls the filter allows is reachable from a sandbox. With networking allowed,
//! the sandbox shares the host's network namespace, loopback and abstract Unix sockets
//! included.
//!
//! # Threads
//!
//! A command holds a thread for as long as it runs (it forks the command's supervisor and
//! waits for it; the supervisor's parent-death signal is tied to that thread). Commands get
//! OS threads of their own, at most [`LocalConfig::exec_threads`] at once, never threads of
//! tokio's blocking pool: the database layer (SQLite) and every other `spawn_blocking` share
//! that pool, and slow commands on it would stall them all. An exec that finds every command
//! thread busy waits for one at most [`LocalConfig::exec_queue_wait`] (and never past its
//! call's deadline; the wait is not taken from the command's own timeout), then is refused
//! with a retryable [`ProviderError::Unavailable`] (`Retry-After` 1 s). The short steps
//! (reading a sandbox's metadata, file reads and writes, create and delete) stay on the
//! blocking pool.
//!
//! Deleting a sandbox kills its running commands and every process of its uid whose root is
//! the sandbox's, and returns once they are gone: only then is its metadata removed, so its
//! uid is never given to a new sandbox while an old process still holds it. Expiry (a
//! create's `timeout`) is enforced when the sandbox is next named by a call: it then reads
//! as `expired`, its files are removed, and exec and file calls answer `NotFound`.
//!
//! On a system where the namespaces cannot be created (no user namespaces, a seccomp policy
//! that forbids `unshare`, no util-linux, not Linux), [`LocalProvider::new`] still succeeds,
//! [`LocalProvider::unavailable_reason`] says why, and every call answers
//! [`ProviderError::Unavailable`] with that reason. The probe runs one real command at
//! construction.
//!
//! # Use
//!
//! ```no_run
//! # async fn demo() -> Result<(), corral_provider::ProviderError> {
//! use corral_provider::{CallContext, CreateSpec, ExecSpec, SandboxProvider};
//! use corral_provider_local::{LocalConfig, LocalProvider};
//!
//! let local = LocalProvider::new(LocalConfig::new("/var/lib/corral/sandboxes"))?;
//! let ctx = CallContext::anonymous();
//! let spec = CreateSpec {
//!     operation_id: corral_domain::OperationId::new(),
//!     request: corral_domain::CreateSandboxRequest::standard(
//!         corral_domain::Provider::Local, None, None),
//!     timeout_seconds: None,
//! };
//! let sandbox = local.create(&ctx, &spec).await?;
//! let out = local.exec(&ctx, &sandbox.native_id, &ExecSpec::new("echo hi")).await?;
//! assert_eq!(out.stdout, b"hi\n");
//! # Ok(()) }
//! ```

mod capabilities;
mod cgroup;
mod disk;
mod files;
mod jail;
mod pool;
mod procs;
mod running;
mod seccomp;
mod store;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use corral_domain::{OperationId, Provider, ProviderCapabilities, SandboxStatus};
use corral_provider::{
    CallContext, CreateSpec, ExecOutput, ExecSpec, ObservedSandbox, ProviderError, Result,
    SandboxProvider,
};

pub use capabilities::{MAX_TIMEOUT_SECONDS, capabilities};

use jail::{Jail, Outcome, Run, WORKSPACE};
use running::Running;
use store::{Metadata, Store};

/// Resource limits of every sandbox (cgroup, disk image) and of every process (rlimits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalLimits {
    /// Processes of one sandbox, all its commands together (`pids.max`; also `RLIMIT_NPROC`
    /// of the sandbox's host uid).
    pub max_processes: u64,
    /// Memory of one sandbox, all its commands together, in bytes (`memory.max`, with swap
    /// off); also the address space of each process (`RLIMIT_AS`).
    pub memory_bytes: u64,
    /// `RLIMIT_FSIZE`: largest file a process may write, in bytes.
    pub file_size_bytes: u64,
    /// `RLIMIT_CPU`: CPU time of one process, in seconds.
    pub cpu_seconds: u64,
    /// Share of CPU time against other sandboxes under contention (`cpu.weight`, 1 ..= 10 000;
    /// 100 is the kernel's default).
    pub cpu_weight: u64,
    /// Most CPU one sandbox may use, in thousandths of a core (`cpu.max`; `None`: no cap).
    pub cpu_max_millicores: Option<u64>,
    /// Size of each sandbox's own filesystem, in bytes, allocated when it is created
    /// (`None`: sandboxes share the filesystem of the root, with no quota).
    pub disk_bytes: Option<u64>,
    /// Space a create must leave free on the root's filesystem, in bytes (for the database
    /// and everything else on that volume).
    pub disk_reserve_bytes: u64,
    /// Disk bandwidth and operations of one sandbox on its own filesystem (needs
    /// `disk_bytes`: the limits are set on the sandbox's loop device).
    pub io: IoLimits,
}

/// Reads and writes of one sandbox per second, all its commands together, on its own
/// filesystem (cgroup v2 `io.max`, v1 `blkio.throttle.*`). `None`: no limit.
///
/// cgroup v1 throttles what a sandbox's processes submit themselves: reads, and writes that
/// are direct or synced (`O_DIRECT`, `fsync`). Plain buffered writes reach the disk later
/// through the kernel's writeback, which v1 does not charge to the sandbox; v2 does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoLimits {
    /// Bytes read per second.
    pub read_bytes_per_second: Option<u64>,
    /// Bytes written per second.
    pub write_bytes_per_second: Option<u64>,
    /// Read operations per second.
    pub read_iops: Option<u64>,
    /// Write operations per second.
    pub write_iops: Option<u64>,
}

impl IoLimits {
    /// No limit at all.
    pub const NONE: Self = Self {
        read_bytes_per_second: None,
        write_bytes_per_second: None,
        read_iops: None,
        write_iops: None,
    };

    /// Whether any limit is set.
    pub fn any(&self) -> bool {
        *self != Self::NONE
    }
}

impl Default for IoLimits {
    /// 256 MiB/s and 4 000 operations/s of reads, 128 MiB/s and 2 000 operations/s of
    /// writes: about what one ordinary cloud volume sustains, so one sandbox cannot take
    /// all of a larger one from the database and the other sandboxes beside it.
    fn default() -> Self {
        Self {
            read_bytes_per_second: Some(256 << 20),
            write_bytes_per_second: Some(128 << 20),
            read_iops: Some(4_000),
            write_iops: Some(2_000),
        }
    }
}

impl Default for LocalLimits {
    /// 1024 processes and 4 GiB of memory per sandbox, 1 GiB files, 600 CPU seconds per
    /// process, CPU weight 100 and no CPU cap, a 1 GiB filesystem per sandbox, 1 GiB kept free,
    /// and the default [`IoLimits`].
    fn default() -> Self {
        Self {
            max_processes: 1024,
            memory_bytes: 4 << 30,
            file_size_bytes: 1 << 30,
            cpu_seconds: 600,
            cpu_weight: 100,
            cpu_max_millicores: None,
            disk_bytes: Some(1 << 30),
            disk_reserve_bytes: 1 << 30,
            io: IoLimits::default(),
        }
    }
}

/// What contains sandboxes on this machine, found when the provider starts. Each part that
/// is missing is logged (warn) with its reason; the provider runs without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Containment {
    /// The cgroup layout in use, or why sandboxes run without cgroups.
    pub cgroups: std::result::Result<String, String>,
    /// The size of each sandbox's own filesystem, or why there is no disk quota.
    pub disk_quota: std::result::Result<u64, String>,
    /// How disk bandwidth is limited, or why it is not.
    pub io: std::result::Result<String, String>,
    /// Whether commands run under the seccomp filter, or why not.
    pub seccomp: std::result::Result<(), String>,
}

/// Default of [`LocalConfig::exec_threads`].
pub const DEFAULT_EXEC_THREADS: usize = 64;

/// Default of [`LocalConfig::exec_queue_wait`].
pub const DEFAULT_EXEC_QUEUE_WAIT: Duration = Duration::from_secs(5);

/// How the local provider is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// Where sandboxes live, e.g. `<data-dir>/sandboxes` (created if missing).
    pub root: PathBuf,
    /// Whether commands share the host's network (default `false`: no network at all).
    pub allow_network: bool,
    /// Resource limits of every command.
    pub limits: LocalLimits,
    /// Where the sandboxes' cgroups go, as a path below the cgroup mount (the same in every
    /// v1 hierarchy), e.g. `system.slice/corral.service` for a systemd unit with
    /// `Delegate=yes`. `None`: `corral` at the mount's root, which needs root. A server that
    /// is not root limits each sandbox as a whole only with a subtree delegated to its uid.
    pub cgroup_parent: Option<PathBuf>,
    /// Commands running at once, all sandboxes together: each runs on a thread of its own,
    /// outside tokio's blocking pool (default [`DEFAULT_EXEC_THREADS`]; at least 1).
    pub exec_threads: usize,
    /// How long an exec waits for one of those threads before it is refused
    /// (`Unavailable`, retryable, `Retry-After` 1 s); never past the call's deadline
    /// (default [`DEFAULT_EXEC_QUEUE_WAIT`]).
    pub exec_queue_wait: Duration,
}

impl LocalConfig {
    /// Sandboxes under `root`, no network, default limits.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            allow_network: false,
            limits: LocalLimits::default(),
            cgroup_parent: None,
            exec_threads: DEFAULT_EXEC_THREADS,
            exec_queue_wait: DEFAULT_EXEC_QUEUE_WAIT,
        }
    }
}

/// The `local` provider. Cheap to share: hold it in an `Arc`.
pub struct LocalProvider {
    caps: ProviderCapabilities,
    store: Store,
    jail: Result<Arc<Jail>, String>,
    running: Arc<Running>,
    /// The threads commands run on.
    pool: pool::ExecPool,
    exec_queue_wait: Duration,
    cgroups: Option<cgroup::Cgroups>,
    disks: Option<disk::Disks>,
    containment: Containment,
}

impl std::fmt::Debug for LocalProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalProvider")
            .field("store", &self.store)
            .field("unavailable_reason", &self.unavailable_reason())
            .finish_non_exhaustive()
    }
}

impl Drop for LocalProvider {
    /// Unmounts the filesystems of this root's sandboxes (each under its setup lock, so no
    /// command of another process sharing the root is being set up on it) and removes their
    /// empty cgroups: neither is state, both are made again when a sandbox is next used, and
    /// a test or a server that goes away leaves no loop device holding a deleted image.
    fn drop(&mut self) {
        let Ok(sandboxes) = self.store.list() else {
            return;
        };
        for meta in sandboxes {
            let fs_root = self.store.fs_root(&meta.native_id);
            let _setup = store::FileLock::exclusive(&store::setup_lock_path(&fs_root));
            // The image itself may already be gone (a test's temporary directory being
            // removed): the mount is what matters.
            if disk::is_mount_point(&fs_root) {
                let _ = disk::unmount(&fs_root);
            }
            if let Some(cgroups) = &self.cgroups {
                cgroups.remove_if_empty(&meta.native_id);
            }
        }
    }
}

fn unavailable(message: impl Into<String>) -> ProviderError {
    ProviderError::Unavailable {
        provider: Provider::Local,
        message: message.into(),
        retry_after: None,
    }
}

fn not_found(id: &str) -> ProviderError {
    ProviderError::NotFound {
        provider: Provider::Local,
        resource: format!("sandbox {id}"),
    }
}

fn invalid(message: impl Into<String>) -> ProviderError {
    ProviderError::InvalidRequest {
        provider: Provider::Local,
        message: message.into(),
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| unavailable(format!("a local worker failed: {e}")))
}

impl LocalProvider {
    /// The provider over `config.root`, which is created if missing (an error if it cannot
    /// be). Whether namespaces work is probed once, here, by running `true` in a sandbox; if
    /// they do not, the provider is still returned and reports itself unavailable.
    pub fn new(config: LocalConfig) -> Result<Self> {
        let store = Store::open(&config.root).map_err(|e| {
            unavailable(format!(
                "the sandbox directory {} cannot be created: {e}",
                config.root.display()
            ))
        })?;
        store.empty_trash();
        store.remove_unfinished();
        let mut seccomp = seccomp_filter();
        let mut jail = probe(&store, &config, seccomp.as_ref().ok().cloned());
        // A filter this kernel refuses must not make the provider unusable: run without it,
        // and say so.
        if let (Err(why), Ok(_)) = (&jail, &seccomp)
            && let Ok(plain) = probe(&store, &config, None)
        {
            seccomp = Err(format!("the filter cannot be loaded here: {why}"));
            jail = Ok(plain);
        }
        let cgroups = cgroup::Cgroups::detect(&config.limits, config.cgroup_parent.as_deref());
        let disks = match config.limits.disk_bytes {
            Some(size) => disk::Disks::detect(size, config.limits.disk_reserve_bytes),
            None => Err("no disk quota is configured (LocalLimits::disk_bytes)".into()),
        };
        let containment = Containment {
            cgroups: cgroups
                .as_ref()
                .map(cgroup::Cgroups::describe)
                .map_err(Clone::clone),
            disk_quota: disks.as_ref().map(disk::Disks::size).map_err(Clone::clone),
            io: io_containment(cgroups.as_ref(), disks.as_ref(), &config.limits.io),
            seccomp: seccomp.as_ref().map(drop).map_err(Clone::clone),
        };
        if jail.is_ok() {
            if let Err(why) = &containment.cgroups {
                tracing::warn!(reason = %why, "local sandboxes run without cgroups: memory, processes and CPU are limited per process only");
            }
            if let Err(why) = &containment.disk_quota {
                tracing::warn!(reason = %why, "local sandboxes have no disk quota");
            }
            if let Err(why) = &containment.io {
                tracing::warn!(reason = %why, "local sandboxes have no disk bandwidth limit");
            }
            if let Err(why) = &containment.seccomp {
                tracing::warn!(reason = %why, "local sandboxes run without a seccomp filter");
            }
        }
        Ok(Self {
            caps: capabilities::capabilities(),
            store,
            jail: jail.map(Arc::new),
            running: Arc::new(Running::default()),
            pool: pool::ExecPool::new(config.exec_threads),
            exec_queue_wait: config.exec_queue_wait,
            cgroups: cgroups.ok(),
            disks: disks.ok(),
            containment,
        })
    }

    /// What contains sandboxes here (cgroups, disk quota, seccomp), and why a part is missing.
    pub fn containment(&self) -> &Containment {
        &self.containment
    }

    /// Why the provider cannot run sandboxes on this machine, if it cannot.
    pub fn unavailable_reason(&self) -> Option<String> {
        self.jail.as_ref().err().cloned()
    }

    fn jail(&self) -> Result<Arc<Jail>> {
        self.jail.clone().map_err(unavailable)
    }

    /// The metadata of a sandbox that exists and has not expired, or `NotFound`.
    async fn live(&self, native_id: &str) -> Result<Metadata> {
        let (meta, status) = self.observe(native_id).await?;
        if status == SandboxStatus::Expired {
            return Err(ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("sandbox {native_id} (it has expired)"),
            });
        }
        Ok(meta)
    }

    /// The metadata and status of a sandbox; expiry is enforced here.
    async fn observe(&self, native_id: &str) -> Result<(Metadata, SandboxStatus)> {
        self.jail()?;
        if !store::is_native_id(native_id) {
            return Err(not_found(native_id));
        }
        let store = self.store.clone();
        let cgroups = self.cgroups.clone();
        let id = native_id.to_owned();
        blocking(move || {
            let meta = store
                .load(&id)
                .map_err(|e| unavailable(format!("cannot read sandbox {id}: {e}")))?
                .ok_or_else(|| not_found(&id))?;
            if meta.expired_at(store::now_unix()) {
                // Best effort: a failure leaves files that the next call removes.
                if end_processes(cgroups.as_ref(), &store, &id, meta.uid).is_ok() {
                    let _ = store.reclaim_files(&id);
                }
                return Ok((meta, SandboxStatus::Expired));
            }
            // After a reboot the sandbox's filesystem must be mounted again before its root
            // is used: otherwise commands would write to the bare mount point, unlimited.
            disk::ensure_mounted(&store.dir(&id), &store.fs_root(&id)).map_err(|e| {
                unavailable(format!("cannot mount the filesystem of sandbox {id}: {e}"))
            })?;
            Ok((meta, SandboxStatus::Running))
        })
        .await?
    }
}

fn observed(meta: &Metadata, status: SandboxStatus) -> ObservedSandbox {
    ObservedSandbox {
        native_id: meta.native_id.clone(),
        status,
        operation_id: meta.operation_id.parse::<OperationId>().ok(),
    }
}

/// How long a delete waits for a sandbox's processes to be gone before it gives up (and the
/// sandbox, with its uid, stays until a retry).
const KILL_PATIENCE: Duration = Duration::from_secs(10);

/// How disk bandwidth is limited: on each sandbox's own loop device, through its cgroup.
fn io_containment(
    cgroups: std::result::Result<&cgroup::Cgroups, &String>,
    disks: std::result::Result<&disk::Disks, &String>,
    io: &IoLimits,
) -> std::result::Result<String, String> {
    if !io.any() {
        return Err("no limit is configured (LocalLimits::io)".into());
    }
    let cgroups = cgroups.map_err(|why| format!("no cgroups: {why}"))?;
    disks.map_err(|why| format!("sandboxes have no filesystem of their own: {why}"))?;
    cgroups.io_controller().ok_or_else(|| {
        "neither the cgroup v2 `io` nor the v1 `blkio` controller is available".to_owned()
    })
}

/// Kills every process of sandbox `id` (its cgroup, and every process of its host uid whose
/// root is the sandbox's) and waits until they are gone; removes its cgroup. The sandbox's
/// metadata, and with it its uid, is removed only after this succeeds; and no uid that any
/// process holds is given to a new sandbox (`Store::free_uid`).
fn end_processes(
    cgroups: Option<&cgroup::Cgroups>,
    store: &Store,
    id: &str,
    uid: Option<u32>,
) -> std::result::Result<(), String> {
    if let Some(cgroups) = cgroups {
        cgroups
            .remove(id, KILL_PATIENCE)
            .map_err(|e| e.to_string())?;
    }
    if let Some(uid) = uid {
        procs::kill_sandbox(uid, &store.fs_root(id), KILL_PATIENCE).map_err(|left| {
            format!("processes {left:?} of uid {uid} are still there after {KILL_PATIENCE:?}")
        })?;
    }
    Ok(())
}

/// The seccomp filter (hex), or why commands run without one.
fn seccomp_filter() -> std::result::Result<String, String> {
    if !std::path::Path::new(seccomp::PERL).exists() {
        return Err(format!(
            "{} (perl-base), which loads the filter, is missing",
            seccomp::PERL
        ));
    }
    seccomp::program().map(|p| seccomp::hex(&p))
}

/// Builds the jail and runs `true` in it once: namespaces either work here or they do not.
/// A seccomp filter that cannot be loaded here makes the jail unusable too.
fn probe(
    store: &Store,
    config: &LocalConfig,
    seccomp: Option<String>,
) -> std::result::Result<Jail, String> {
    let why = |e: String| format!("Linux namespaces are not usable on this machine: {e}");
    if !cfg!(target_os = "linux") {
        return Err(why("not Linux".into()));
    }
    let jail = Jail::new(config.allow_network, &config.limits, seccomp).map_err(why)?;
    let uid = jail.per_sandbox_uid().then_some(store::PROBE_UID);
    let root = store
        .probe_root(uid)
        .map_err(|e| why(format!("cannot prepare the probe sandbox: {e}")))?;
    let env = BTreeMap::new();
    let run = Run {
        command: "true",
        cwd: WORKSPACE,
        env: &env,
        timeout: Duration::from_secs(20),
        max_output_bytes: 4096,
    };
    let outcome = jail.run(&root, uid, &run, None, None);
    store.remove_probe(&root);
    match outcome {
        Ok(Outcome::Finished(out)) if out.exit_code == 0 => Ok(jail),
        Ok(Outcome::Finished(out)) => Err(why(format!(
            "the probe command exited with {}: {}",
            out.exit_code,
            corral_provider::excerpt(&String::from_utf8_lossy(&out.stderr), 300)
        ))),
        Ok(_) => Err(why("the probe command did not finish in 20 s".into())),
        Err(e) => Err(why(corral_provider::excerpt(&e, 300))),
    }
}

fn check_exec(spec: &ExecSpec) -> Result<()> {
    if spec.command.contains('\0') {
        return Err(invalid("the command contains a NUL byte"));
    }
    for (k, v) in &spec.env {
        let shell_name = k
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !shell_name {
            return Err(invalid(format!(
                "`{k}` is not a valid environment variable name"
            )));
        }
        if v.contains('\0') {
            return Err(invalid(format!("the value of `{k}` contains a NUL byte")));
        }
    }
    Ok(())
}

#[async_trait]
impl SandboxProvider for LocalProvider {
    fn provider(&self) -> Provider {
        Provider::Local
    }

    fn capabilities(&self) -> &ProviderCapabilities {
        &self.caps
    }

    async fn create(&self, _ctx: &CallContext, spec: &CreateSpec) -> Result<ObservedSandbox> {
        self.jail()?;
        if let Some(t) = spec.timeout_seconds
            && !(1..=MAX_TIMEOUT_SECONDS).contains(&t)
        {
            return Err(invalid(format!(
                "timeout {t} is outside 1..={MAX_TIMEOUT_SECONDS} seconds"
            )));
        }
        let per_sandbox_uid = self.jail()?.per_sandbox_uid();
        let now = store::now_unix();
        let mut meta = Metadata {
            native_id: store::new_native_id(),
            operation_id: spec.operation_id.to_string(),
            created_at_unix: now,
            timeout_seconds: spec.timeout_seconds,
            expires_at_unix: spec.timeout_seconds.map(|t| now.saturating_add(t)),
            uid: None,
        };
        let store = self.store.clone();
        let disks = self.disks.clone();
        let mut record = meta.clone();
        meta = blocking(move || {
            // One create at a time across every process sharing the root, so no two sandboxes
            // ever pick the same uid.
            let _one_at_a_time = store
                .lock_creates()
                .map_err(|e| unavailable(format!("cannot lock the sandboxes root: {e}")))?;
            if per_sandbox_uid {
                record.uid = Some(
                    store
                        .free_uid()
                        .map_err(|e| unavailable(format!("cannot pick a sandbox uid: {e}")))?,
                );
            }
            store.create(&record, disks.as_ref()).map_err(|e| {
                // Without its metadata the directory is not a sandbox; clean it up.
                let _ = store.delete(&record.native_id);
                unavailable(format!("cannot create the sandbox directory: {e}"))
            })?;
            Ok::<_, ProviderError>(record)
        })
        .await??;
        Ok(observed(&meta, SandboxStatus::Running))
    }

    async fn get(&self, _ctx: &CallContext, native_id: &str) -> Result<ObservedSandbox> {
        let (meta, status) = self.observe(native_id).await?;
        Ok(observed(&meta, status))
    }

    async fn delete(&self, _ctx: &CallContext, native_id: &str) -> Result<()> {
        self.jail()?;
        if !store::is_native_id(native_id) {
            return Ok(());
        }
        // Running commands of the sandbox are killed with it.
        self.running.cancel_all(native_id);
        let store = self.store.clone();
        let cgroups = self.cgroups.clone();
        let id = native_id.to_owned();
        blocking(move || {
            let fail = |e: String| unavailable(format!("cannot delete sandbox {id}: {e}"));
            // The metadata (which holds the uid) goes last: until every process of the
            // sandbox is gone, its uid is not free for another sandbox.
            // Unreadable metadata is not a sandbox (`Store::list` skips it), so its uid is
            // not held either: delete what is there.
            let uid = store.load(&id).ok().flatten().and_then(|m| m.uid);
            end_processes(cgroups.as_ref(), &store, &id, uid).map_err(&fail)?;
            store.delete(&id).map_err(|e| fail(e.to_string()))
        })
        .await?
    }

    async fn exec(
        &self,
        ctx: &CallContext,
        native_id: &str,
        spec: &ExecSpec,
    ) -> Result<ExecOutput> {
        let jail = self.jail()?;
        check_exec(spec)?;
        // The write end lives in the registry of running commands, removed when this future
        // ends or is dropped, or when the sandbox is deleted (even before the command starts:
        // it is registered before the sandbox is looked up): the read end then hangs up and
        // the worker kills the command instead of letting it run to its deadline.
        let (cancel, cancel_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| unavailable(format!("cannot create a pipe: {e}")))?;
        let _running = self.running.register(native_id, cancel_w);
        let meta = self.live(native_id).await?;
        // A thread of the command pool (never tokio's blocking pool, which SQLite needs),
        // waited for at most `exec_queue_wait` and never past the call's deadline.
        let wait = ctx.bounded(self.exec_queue_wait);
        let thread = self.pool.reserve(wait).await.map_err(|busy| {
            ProviderError::Unavailable {
                provider: Provider::Local,
                message: format!(
                    "all {} threads that run local commands are busy (waited {} ms for one); retry after Retry-After",
                    busy.size,
                    busy.waited.as_millis()
                ),
                retry_after: Some(Duration::from_secs(1)),
            }
        })?;
        let fs_root = self.store.fs_root(native_id);
        // Measured once the thread is ours: the wait is not taken from the command's time,
        // but the call's deadline still bounds it.
        let timeout = ctx.bounded(spec.timeout);
        // A command never outlives its sandbox: the lifetime's end is a deadline too.
        let lifetime_left = meta.expires_at_unix.map(|end| {
            (std::time::UNIX_EPOCH + Duration::from_secs(end))
                .duration_since(std::time::SystemTime::now())
                .unwrap_or_default()
        });
        let run_for = lifetime_left.map_or(timeout, |left| left.min(timeout));
        let cwd = spec.cwd.clone().unwrap_or_else(|| WORKSPACE.to_owned());
        let spec = spec.clone();
        let cgroups = self.cgroups.clone();
        let id = native_id.to_owned();
        let outcome = thread
            .run(move || {
                files::check_cwd(&fs_root, &cwd).map_err(invalid)?;
                let run = Run {
                    command: &spec.command,
                    cwd: &cwd,
                    env: &spec.env,
                    timeout: run_for,
                    max_output_bytes: spec.max_output_bytes,
                };
                let cgroup = cgroups.as_ref().map(|c| (c, id.as_str()));
                jail.run(&fs_root, meta.uid, &run, Some(&cancel), cgroup)
                    .map_err(|e| unavailable(format!("the sandbox could not run the command: {e}")))
            })
            .await
            .map_err(unavailable)??;
        match outcome {
            Outcome::Finished(out) => Ok(out),
            Outcome::TimedOut if run_for < timeout => Err(ProviderError::NotFound {
                provider: Provider::Local,
                resource: format!("sandbox {native_id} (it expired while the command ran)"),
            }),
            Outcome::TimedOut => Err(ProviderError::CommandTimedOut { after: timeout }),
            Outcome::Cancelled => Err(not_found(native_id)),
        }
    }

    async fn read_file(
        &self,
        _ctx: &CallContext,
        native_id: &str,
        path: &str,
        max_bytes: usize,
    ) -> Result<Vec<u8>> {
        self.live(native_id).await?;
        let fs_root = self.store.fs_root(native_id);
        let path = path.to_owned();
        blocking(move || files::read(&fs_root, &path, max_bytes)).await?
    }

    async fn write_file(
        &self,
        _ctx: &CallContext,
        native_id: &str,
        path: &str,
        content: &[u8],
    ) -> Result<()> {
        let meta = self.live(native_id).await?;
        let fs_root = self.store.fs_root(native_id);
        let path = path.to_owned();
        let content = content.to_vec();
        blocking(move || files::write(&fs_root, &path, &content, meta.uid)).await?
    }

    async fn find_by_operation_id(
        &self,
        _ctx: &CallContext,
        operation_id: &OperationId,
    ) -> Result<Vec<ObservedSandbox>> {
        self.jail()?;
        let store = self.store.clone();
        let wanted = operation_id.to_string();
        blocking(move || {
            let now = store::now_unix();
            let all = store
                .list()
                .map_err(|e| unavailable(format!("cannot list sandboxes: {e}")))?;
            Ok(all
                .iter()
                .filter(|m| m.operation_id == wanted)
                .map(|m| {
                    let status = if m.expired_at(now) {
                        SandboxStatus::Expired
                    } else {
                        SandboxStatus::Running
                    };
                    observed(m, status)
                })
                .collect())
        })
        .await?
    }
}
