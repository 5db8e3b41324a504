//! Capacity shared by every sandbox: caps on what all sandboxes together, and all sandboxes
//! of one project together, may hold.
//!
//! - **Disk reserved** (the sandboxes' images, each allocated whole at create): accounted at
//!   create, under the lock that serialises creates across every process sharing the root;
//!   a create that would pass a cap is refused before anything is made.
//! - **Memory** and **processes**: the kernel's, through parent cgroups: the sandboxes'
//!   subtree (server-wide) and one group per project inside it, each with `memory.max` (swap
//!   off) and `pids.max`. A sandbox inside its own limit can still be stopped by its
//!   project's or the server's: the kernel's OOM killer then picks within that parent.
//! - **Live sandboxes per project**: counted at create, like disk.
//!
//! Defaults are derived from the machine ([`LocalCapacity::for_this_machine`]).

use std::path::Path;

/// Caps on what a set of sandboxes holds together. `u64::MAX`: no cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapacityLimits {
    /// Disk reserved by their images, in bytes.
    pub disk_bytes: u64,
    /// Memory of all their processes, in bytes (cgroup `memory.max`, swap off).
    pub memory_bytes: u64,
    /// Their processes (cgroup `pids.max`).
    pub processes: u64,
}

impl CapacityLimits {
    /// No cap at all.
    pub const NONE: Self = Self {
        disk_bytes: u64::MAX,
        memory_bytes: u64::MAX,
        processes: u64::MAX,
    };
}

/// Server-wide and per-project caps of `local` (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalCapacity {
    /// Every sandbox of this server (of every server sharing its sandboxes root for disk,
    /// and its cgroup subtree for memory and processes).
    pub server: CapacityLimits,
    /// The sandboxes of one project.
    pub per_project: CapacityLimits,
    /// Live sandboxes (created, not deleted, not expired) of one project.
    pub sandboxes_per_project: u64,
}

/// Default of [`LocalCapacity::sandboxes_per_project`].
pub const DEFAULT_SANDBOXES_PER_PROJECT: u64 = 32;

impl LocalCapacity {
    /// No cap at all (as before caps existed).
    pub const NONE: Self = Self {
        server: CapacityLimits::NONE,
        per_project: CapacityLimits::NONE,
        sandboxes_per_project: u64::MAX,
    };

    /// Caps derived from this machine, for sandboxes under `root`: server-wide, half the
    /// volume that holds `root`, three quarters of the memory, and half the processes the
    /// kernel allows (the lower of `pid_max` and `threads-max`); per project, a quarter of
    /// each; and [`DEFAULT_SANDBOXES_PER_PROJECT`] live sandboxes per project. A figure
    /// that cannot be read leaves that cap off.
    pub fn for_this_machine(root: &Path) -> Self {
        let volume = rustix::fs::statvfs(root)
            .ok()
            .map(|s| s.f_blocks.saturating_mul(s.f_frsize));
        let memory = read_meminfo_total();
        let processes = ["/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"]
            .iter()
            .filter_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok())
            .min();
        let server = CapacityLimits {
            disk_bytes: volume.map_or(u64::MAX, |v| v / 2),
            memory_bytes: memory.map_or(u64::MAX, |m| m / 4 * 3),
            processes: processes.map_or(u64::MAX, |p| (p / 2).max(1)),
        };
        let quarter = |n: u64| if n == u64::MAX { n } else { (n / 4).max(1) };
        Self {
            server,
            per_project: CapacityLimits {
                disk_bytes: quarter(server.disk_bytes),
                memory_bytes: quarter(server.memory_bytes),
                processes: quarter(server.processes),
            },
            sandboxes_per_project: DEFAULT_SANDBOXES_PER_PROJECT,
        }
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn read_meminfo_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// What one existing sandbox holds, as far as the caps are concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Held {
    /// Its project, if it counts against one.
    pub(crate) project: Option<String>,
    /// Disk its image reserves (0 without one, or once its files are reclaimed).
    pub(crate) disk_bytes: u64,
    /// Whether it is live (not expired).
    pub(crate) live: bool,
}

/// Why a create was refused, and whether for good: a sandbox larger than a cap itself can
/// never fit, whatever is deleted, so that refusal says what to configure instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused(pub(crate) String, pub(crate) Permanence);

/// Whether a refusal can pass once room is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Permanence {
    /// Room can be made (delete sandboxes).
    UntilRoom,
    /// Never, with this configuration.
    Never,
}

impl Refused {
    /// The provider's error: out of capacity (retryable), or an invalid request for a
    /// sandbox no cap can hold.
    pub(crate) fn into_error(self) -> corral_provider::ProviderError {
        let provider = corral_domain::Provider::Local;
        match self.1 {
            Permanence::UntilRoom => corral_provider::ProviderError::CapacityExceeded {
                provider,
                message: self.0,
            },
            Permanence::Never => corral_provider::ProviderError::InvalidRequest {
                provider,
                message: self.0,
            },
        }
    }
}

/// Whether `disk` more bytes of `project` (a snapshot's) fit beside `held`: the disk caps
/// only (a snapshot is no live sandbox).
pub(crate) fn admit_disk(
    caps: &LocalCapacity,
    held: &[Held],
    project: Option<&str>,
    disk: u64,
) -> Result<(), Refused> {
    // The same caps as a sandbox's, with no live sandbox to count.
    let unlimited = LocalCapacity {
        sandboxes_per_project: u64::MAX,
        ..*caps
    };
    admit(&unlimited, held, project, disk)
}

/// Whether a new sandbox of `project` reserving `disk` bytes fits beside `held`.
pub(crate) fn admit(
    caps: &LocalCapacity,
    held: &[Held],
    project: Option<&str>,
    disk: u64,
) -> Result<(), Refused> {
    let mib = |b: u64| b / (1 << 20);
    let too_large = |cap: u64, key: &str| {
        Refused(
            format!(
                "a local sandbox reserves {} MiB of disk ([local] disk_mib), more than {key} of \
                 {} MiB, so no sandbox can ever be made: raise the cap in [local.capacity] or \
                 lower [local] disk_mib",
                mib(disk),
                mib(cap)
            ),
            Permanence::Never,
        )
    };
    if disk > caps.server.disk_bytes {
        return Err(too_large(
            caps.server.disk_bytes,
            "the server's cap (disk_mib; by default half the data volume)",
        ));
    }
    if project.is_some() && disk > caps.per_project.disk_bytes {
        return Err(too_large(
            caps.per_project.disk_bytes,
            "each project's cap (project_disk_mib; by default a quarter of the server's)",
        ));
    }
    let server_disk: u64 = held.iter().map(|h| h.disk_bytes).sum();
    if disk > 0 && server_disk.saturating_add(disk) > caps.server.disk_bytes {
        return Err(Refused(
            format!(
                "the local sandboxes of this server already reserve {} MiB of disk, and another \
                 {} MiB would pass the server's cap of {} MiB; delete sandboxes to make room",
                mib(server_disk),
                mib(disk),
                mib(caps.server.disk_bytes)
            ),
            Permanence::UntilRoom,
        ));
    }
    let Some(project) = project else {
        return Ok(());
    };
    let own = || {
        held.iter()
            .filter(|h| h.project.as_deref() == Some(project))
    };
    let live = u64::try_from(own().filter(|h| h.live).count()).unwrap_or(u64::MAX);
    if live >= caps.sandboxes_per_project {
        return Err(Refused(
            format!(
                "project `{project}` already has {live} live local sandboxes, its cap; delete \
                 one to make room"
            ),
            Permanence::UntilRoom,
        ));
    }
    let project_disk: u64 = own().map(|h| h.disk_bytes).sum();
    if disk > 0 && project_disk.saturating_add(disk) > caps.per_project.disk_bytes {
        return Err(Refused(
            format!(
                "project `{project}`'s local sandboxes already reserve {} MiB of disk, and \
                 another {} MiB would pass its cap of {} MiB; delete sandboxes to make room",
                mib(project_disk),
                mib(disk),
                mib(caps.per_project.disk_bytes)
            ),
            Permanence::UntilRoom,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(project: &str, disk_mib: u64, live: bool) -> Held {
        Held {
            project: Some(project.into()),
            disk_bytes: disk_mib << 20,
            live,
        }
    }

    #[test]
    fn disk_is_capped_server_wide_and_per_project_and_live_sandboxes_per_project() {
        let caps = LocalCapacity {
            server: CapacityLimits {
                disk_bytes: 100 << 20,
                ..CapacityLimits::NONE
            },
            per_project: CapacityLimits {
                disk_bytes: 60 << 20,
                ..CapacityLimits::NONE
            },
            sandboxes_per_project: 2,
        };
        let now = [held("a", 30, true), held("b", 30, true)];
        assert_eq!(admit(&caps, &now, Some("a"), 30 << 20), Ok(()));
        // 30 + 40 > 60 for project a; the server still has room.
        assert!(admit(&caps, &now, Some("a"), 40 << 20).is_err());
        assert_eq!(admit(&caps, &now, None, 40 << 20), Ok(()));
        // 60 + 41 > 100 for the server, whatever the project.
        assert!(admit(&caps, &now, Some("c"), 41 << 20).is_err());
        let two = [held("a", 0, true), held("a", 0, true), held("a", 0, false)];
        assert!(
            admit(&caps, &two, Some("a"), 0)
                .unwrap_err()
                .0
                .contains("2 live")
        );
        assert_eq!(admit(&caps, &two[1..], Some("a"), 0), Ok(()));
    }

    #[test]
    fn a_sandbox_larger_than_a_cap_is_refused_for_good_and_says_what_to_configure() {
        // A small volume: the per-project cap (a quarter of the server's) is under one
        // sandbox's default 1 GiB, so no create of a project can ever pass.
        let caps = LocalCapacity {
            server: CapacityLimits {
                disk_bytes: 3 << 30,
                ..CapacityLimits::NONE
            },
            per_project: CapacityLimits {
                disk_bytes: 768 << 20,
                ..CapacityLimits::NONE
            },
            sandboxes_per_project: 32,
        };
        let refused = admit(&caps, &[], Some("a"), 1 << 30).unwrap_err();
        assert_eq!(refused.1, Permanence::Never, "{}", refused.0);
        assert!(refused.0.contains("project_disk_mib"), "{}", refused.0);
        assert!(matches!(
            refused.into_error(),
            corral_provider::ProviderError::InvalidRequest { .. }
        ));
        // Server-wide too, with or without a project.
        let refused = admit(&caps, &[], None, 4 << 30).unwrap_err();
        assert_eq!(refused.1, Permanence::Never);
        assert!(refused.0.contains("[local.capacity]"), "{}", refused.0);
        // A cap that is only full now can pass once room is made: retryable.
        let full = [held("a", 700, true)];
        let refused = admit(&caps, &full, Some("a"), 100 << 20).unwrap_err();
        assert_eq!(refused.1, Permanence::UntilRoom);
        assert!(matches!(
            refused.into_error(),
            corral_provider::ProviderError::CapacityExceeded { .. }
        ));
    }

    #[test]
    fn the_machine_defaults_are_fractions_of_what_the_machine_has() {
        let caps = LocalCapacity::for_this_machine(Path::new("/"));
        let total = read_meminfo_total().unwrap();
        assert!(caps.server.memory_bytes < total && caps.server.memory_bytes > total / 2);
        assert_eq!(caps.per_project.memory_bytes, caps.server.memory_bytes / 4);
        assert!(caps.server.disk_bytes > 0 && caps.server.disk_bytes < u64::MAX);
        assert!(caps.server.processes > 0 && caps.server.processes < u64::MAX);
        assert_eq!(caps.sandboxes_per_project, DEFAULT_SANDBOXES_PER_PROJECT);
    }
}
