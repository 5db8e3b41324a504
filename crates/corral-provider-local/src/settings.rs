//! The `[local]` table of the server's configuration: its schema (every key optional, unknown
//! keys refused), its checks, and the [`LocalConfig`] it makes. The binary reads the table; the
//! provider's own crate knows what each key means, as each adapter reads its
//! `[providers.<id>]` table.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::{
    ImageSource, InitProgram, IoLimits, LocalCapacity, LocalConfig, LocalLimits, NetworkConfig,
};

/// The `[local]` table of the server's configuration, as written (every key optional,
/// unknown keys refused); [`LocalSettings::config`] turns it into a [`LocalConfig`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalSettings {
    /// Where sandboxes live; default `<data_dir>/sandboxes`.
    pub root: Option<PathBuf>,
    /// Refused when `true`: the unguarded host network is not offered by the server (use
    /// `network`).
    pub allow_network: Option<bool>,
    /// Memory of the whole sandbox, swap off (its cgroup), and address space per process, in
    /// MiB.
    pub memory_mib: Option<u64>,
    /// Processes of the whole sandbox (its cgroup's `pids.max`, and `RLIMIT_NPROC`).
    pub max_processes: Option<u64>,
    /// Size of each sandbox's own filesystem, in MiB, allocated in full at create; `0` puts
    /// sandboxes directly on the data volume (no quota).
    pub disk_mib: Option<u64>,
    /// Free space a create must leave on the data volume, in MiB.
    pub disk_reserve_mib: Option<u64>,
    /// The sandbox's CPU weight against other sandboxes (cgroup `cpu.weight`, 1–10000).
    pub cpu_weight: Option<u64>,
    /// A hard CPU cap per sandbox in thousandths of a core (cgroup `cpu.max`); none by default.
    pub cpu_max_millicores: Option<u64>,
    /// Disk reads per sandbox on its own filesystem, MiB/s (cgroup `io.max` / v1
    /// `blkio.throttle`); default 256, `0` = no limit.
    pub io_read_mib_per_second: Option<u64>,
    /// Disk writes per sandbox, MiB/s; default 128, `0` = no limit.
    pub io_write_mib_per_second: Option<u64>,
    /// Disk read operations per sandbox per second; default 4000, `0` = no limit.
    pub io_read_iops: Option<u64>,
    /// Disk write operations per sandbox per second; default 2000, `0` = no limit.
    pub io_write_iops: Option<u64>,
    /// Where the sandboxes' cgroups go, below the cgroup mount (e.g. a systemd unit's own
    /// group with `Delegate=yes`); default `corral` at the root, which needs a root server.
    pub cgroup_parent: Option<PathBuf>,
    /// Largest file a command may write, in MiB (`RLIMIT_FSIZE`).
    pub file_size_mib: Option<u64>,
    /// CPU seconds per command process (`RLIMIT_CPU`).
    pub cpu_seconds: Option<u64>,
    /// Commands running at once, each on a thread of its own; default 64, at least 1.
    pub exec_threads: Option<u64>,
    /// How long an exec waits for a free command thread before `provider_unavailable`;
    /// default 5.
    pub exec_queue_wait_seconds: Option<u64>,
    /// Guarded networking for sandboxes that ask for it; default off.
    pub network: Option<bool>,
    /// Ranges (`a.b.c.d/n`) sandboxes with a network may reach despite the guard.
    pub network_allow: Option<Vec<String>>,
    /// The resolver their DNS queries are relayed to (an IPv4 address); default the host's.
    pub dns_upstream: Option<String>,
    /// Images a create may name.
    pub images: Option<BTreeMap<String, ImageSettings>>,
    /// Caps across sandboxes; each default is derived from the machine.
    pub capacity: Option<CapacitySettings>,
}

/// `[local.images] <name> = { dir = … }` or `{ oci = …, tag = … }`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ImageSettings {
    /// A root filesystem directory.
    pub dir: Option<PathBuf>,
    /// An OCI image layout directory.
    pub oci: Option<PathBuf>,
    /// The tag (`org.opencontainers.image.ref.name`) in the layout, when it holds several.
    pub tag: Option<String>,
}

/// `[local.capacity]`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CapacitySettings {
    /// Disk reserved by every sandbox's image together, MiB.
    pub disk_mib: Option<u64>,
    /// Memory of every sandbox together, MiB.
    pub memory_mib: Option<u64>,
    /// Processes of every sandbox together.
    pub max_processes: Option<u64>,
    /// Disk reserved by one project's sandboxes, MiB.
    pub project_disk_mib: Option<u64>,
    /// Memory of one project's sandboxes, MiB.
    pub project_memory_mib: Option<u64>,
    /// Processes of one project's sandboxes.
    pub project_max_processes: Option<u64>,
    /// Live sandboxes of one project.
    pub sandboxes_per_project: Option<u64>,
}

impl LocalSettings {
    /// Whether the table holds together: each image names one source (`tag` only with
    /// `oci`), the allowed ranges and the DNS upstream parse, at least one exec thread.
    ///
    /// # Errors
    /// What is wrong, naming the key.
    pub fn check(&self) -> Result<(), String> {
        for (name, image) in self.images.iter().flatten() {
            if image.dir.is_some() == image.oci.is_some() {
                return Err(format!(
                    "local.images.{name} needs exactly one of `dir` and `oci`"
                ));
            }
            if image.dir.is_some() && image.tag.is_some() {
                return Err(format!("local.images.{name}: `tag` goes with `oci`"));
            }
        }
        for range in self.network_allow.iter().flatten() {
            range
                .parse::<crate::Ipv4Net>()
                .map_err(|e| format!("local.network_allow: {e}"))?;
        }
        if let Some(dns) = &self.dns_upstream {
            dns.parse::<std::net::Ipv4Addr>()
                .map_err(|_| format!("local.dns_upstream `{dns}` is not an IPv4 address"))?;
        }
        if self.exec_threads == Some(0) {
            return Err("local.exec_threads must be at least 1".into());
        }
        Ok(())
    }

    /// The provider's configuration: sandboxes under `root` (unless `root` is set here), each
    /// one's init `init`.
    ///
    /// # Errors
    /// A range, DNS upstream or image that does not parse.
    pub fn config(&self, root: PathBuf, init: Option<InitProgram>) -> Result<LocalConfig, String> {
        let root = self.root.clone().unwrap_or(root);
        let defaults = LocalLimits::default();
        let mib = |v: Option<u64>, d: u64| v.map_or(d, |m| m.saturating_mul(1024 * 1024));
        Ok(LocalConfig {
            root: root.clone(),
            allow_network: self.allow_network.unwrap_or(false),
            limits: LocalLimits {
                max_processes: self.max_processes.unwrap_or(defaults.max_processes),
                memory_bytes: mib(self.memory_mib, defaults.memory_bytes),
                file_size_bytes: mib(self.file_size_mib, defaults.file_size_bytes),
                cpu_seconds: self.cpu_seconds.unwrap_or(defaults.cpu_seconds),
                cpu_weight: self.cpu_weight.unwrap_or(defaults.cpu_weight),
                cpu_max_millicores: self.cpu_max_millicores.or(defaults.cpu_max_millicores),
                disk_bytes: match self.disk_mib {
                    Some(0) => None,
                    Some(m) => Some(m.saturating_mul(1024 * 1024)),
                    None => defaults.disk_bytes,
                },
                disk_reserve_bytes: mib(self.disk_reserve_mib, defaults.disk_reserve_bytes),
                io: IoLimits {
                    read_bytes_per_second: limit(
                        self.io_read_mib_per_second
                            .map(|m| m.saturating_mul(1024 * 1024)),
                        defaults.io.read_bytes_per_second,
                    ),
                    write_bytes_per_second: limit(
                        self.io_write_mib_per_second
                            .map(|m| m.saturating_mul(1024 * 1024)),
                        defaults.io.write_bytes_per_second,
                    ),
                    read_iops: limit(self.io_read_iops, defaults.io.read_iops),
                    write_iops: limit(self.io_write_iops, defaults.io.write_iops),
                },
            },
            cgroup_parent: self.cgroup_parent.clone(),
            network: self.network_config()?,
            images: self
                .images
                .iter()
                .flatten()
                .map(|(name, image)| {
                    let source = match (&image.dir, &image.oci) {
                        (Some(dir), _) => ImageSource::Directory(dir.clone()),
                        (None, Some(oci)) => ImageSource::OciLayout {
                            path: oci.clone(),
                            reference: image.tag.clone(),
                        },
                        (None, None) => {
                            return Err(format!("local.images.{name}: no `dir` or `oci`"));
                        }
                    };
                    Ok((name.clone(), source))
                })
                .collect::<Result<_, String>>()?,
            capacity: self.capacity.map(|c| {
                let mut caps = LocalCapacity::for_this_machine(&root);
                let mib = |v: Option<u64>, d: u64| v.map_or(d, |m| m.saturating_mul(1024 * 1024));
                caps.server.disk_bytes = mib(c.disk_mib, caps.server.disk_bytes);
                caps.server.memory_bytes = mib(c.memory_mib, caps.server.memory_bytes);
                caps.server.processes = c.max_processes.unwrap_or(caps.server.processes);
                caps.per_project.disk_bytes = mib(c.project_disk_mib, caps.per_project.disk_bytes);
                caps.per_project.memory_bytes =
                    mib(c.project_memory_mib, caps.per_project.memory_bytes);
                caps.per_project.processes = c
                    .project_max_processes
                    .unwrap_or(caps.per_project.processes);
                caps.sandboxes_per_project = c
                    .sandboxes_per_project
                    .unwrap_or(caps.sandboxes_per_project);
                caps
            }),
            init,
            exec_threads: self.exec_threads.map_or(crate::DEFAULT_EXEC_THREADS, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
            exec_queue_wait: self.exec_queue_wait_seconds.map_or(
                crate::DEFAULT_EXEC_QUEUE_WAIT,
                std::time::Duration::from_secs,
            ),
        })
    }

    /// Guarded networking, when `network = true`.
    fn network_config(&self) -> Result<Option<NetworkConfig>, String> {
        if self.network != Some(true) {
            return Ok(None);
        }
        let allow = self
            .network_allow
            .iter()
            .flatten()
            .map(|r| r.parse().map_err(|e| format!("local.network_allow: {e}")))
            .collect::<Result<_, String>>()?;
        let dns_upstream = self
            .dns_upstream
            .as_deref()
            .map(|d| d.parse().map_err(|_| format!("local.dns_upstream `{d}`")))
            .transpose()?;
        Ok(Some(NetworkConfig {
            allow,
            dns_upstream,
            ..NetworkConfig::default()
        }))
    }
}

/// A configured limit: absent → the default, `0` → none.
fn limit(configured: Option<u64>, default: Option<u64>) -> Option<u64> {
    match configured {
        Some(0) => None,
        Some(n) => Some(n),
        None => default,
    }
}
