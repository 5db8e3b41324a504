//! How the `local` provider is set up: [`LocalConfig`], the limits of every sandbox
//! ([`LocalLimits`], [`IoLimits`]) and what one create asks beyond the port ([`LocalCreate`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::{ImageSource, InitProgram, LocalCapacity, NetworkConfig};

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

/// Default of [`LocalConfig::exec_threads`].
pub const DEFAULT_EXEC_THREADS: usize = 64;

/// Default of [`LocalConfig::exec_queue_wait`].
pub const DEFAULT_EXEC_QUEUE_WAIT: Duration = Duration::from_secs(5);

/// How the local provider is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// Where sandboxes live, e.g. `<data-dir>/sandboxes` (created if missing).
    pub root: PathBuf,
    /// Whether commands share the host's network namespace (default `false`). Unguarded:
    /// the host's loopback and every address the host reaches are reachable. Prefer
    /// [`LocalConfig::network`].
    pub allow_network: bool,
    /// Guarded networking, per sandbox (`None`, the default: no sandbox has a network).
    pub network: Option<NetworkConfig>,
    /// Resource limits of every command.
    pub limits: LocalLimits,
    /// Where the sandboxes' cgroups go, as a path below the cgroup mount (the same in every
    /// v1 hierarchy), e.g. `system.slice/corral.service` for a systemd unit with
    /// `Delegate=yes`. `None`: `corral` at the mount's root, which needs root. A server that
    /// is not root limits each sandbox as a whole only with a subtree delegated to its uid.
    pub cgroup_parent: Option<PathBuf>,
    /// Commands running at once, all sandboxes together: each is watched by a thread of its
    /// own, outside tokio's blocking pool (default [`DEFAULT_EXEC_THREADS`]; at least 1).
    pub exec_threads: usize,
    /// How long an exec waits for one of those threads before it is refused
    /// (`Unavailable`, retryable, `Retry-After` 1 s); never past the call's deadline
    /// (default [`DEFAULT_EXEC_QUEUE_WAIT`]).
    pub exec_queue_wait: Duration,
    /// Images a create may name (`image`), by name: root filesystem directories or OCI image
    /// layouts (unpacked once, at start). Empty (the default): `image` is not selectable,
    /// and every sandbox sees the host's system directories.
    pub images: BTreeMap<String, ImageSource>,
    /// Caps on what all sandboxes together, and each project's together, hold (`None`:
    /// [`LocalCapacity::for_this_machine`]).
    pub capacity: Option<LocalCapacity>,
    /// The program run as each sandbox's init (`None`: `corral-sandbox-init` beside this
    /// executable if there is one, else this executable with [`INIT_ARG`](crate::INIT_ARG), which works when
    /// its `main` calls [`run_init_if_requested`](crate::run_init_if_requested) first).
    pub init: Option<InitProgram>,
}

impl LocalConfig {
    /// Sandboxes under `root`, no network, default limits.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            allow_network: false,
            network: None,
            limits: LocalLimits::default(),
            cgroup_parent: None,
            exec_threads: DEFAULT_EXEC_THREADS,
            exec_queue_wait: DEFAULT_EXEC_QUEUE_WAIT,
            images: BTreeMap::new(),
            capacity: None,
            init: None,
        }
    }
}

/// What one create asks of `local` beyond the port's [`CreateSpec`](corral_provider::CreateSpec).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocalCreate {
    /// The project the sandbox counts against (its per-project caps); `None`: no project.
    pub project: Option<String>,
    /// A network of its own (guarded; needs [`LocalConfig::network`]).
    pub network: bool,
}
