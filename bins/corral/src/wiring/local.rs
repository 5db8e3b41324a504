//! The `local` provider, built from the configuration (`[local]` and the data directory):
//! the one provider `wiring` does not build from a `[providers.<id>]` table.

use std::sync::Arc;

use corral_provider::SandboxProvider;
use corral_provider_local::{
    ImageSource, InitProgram, IoLimits, LocalCapacity, LocalConfig, LocalLimits, LocalProvider,
    NetworkConfig,
};

use crate::config::Settings;

/// Builds `local` under `<data_dir>/sandboxes` (or `[local] root`). A machine that cannot run
/// it still gets the provider (every call then answers `provider_unavailable` with the reason).
pub(super) fn build(settings: &Settings) -> Result<Arc<dyn SandboxProvider>, String> {
    let l = &settings.local;
    let defaults = LocalLimits::default();
    // Each sandbox's init is this executable (`main` runs it when asked).
    let init = InitProgram::current_exe()
        .map_err(|e| format!("cannot find the corral executable: {e}"))?;
    let mib = |v: Option<u64>, d: u64| v.map_or(d, |m| m.saturating_mul(1024 * 1024));
    let config = LocalConfig {
        root: l
            .root
            .clone()
            .unwrap_or_else(|| settings.data_dir.join("sandboxes")),
        // Refused when set (`config::sections::local`): the server never shares the host's
        // network namespace.
        allow_network: false,
        limits: LocalLimits {
            max_processes: l.max_processes.unwrap_or(defaults.max_processes),
            memory_bytes: mib(l.memory_mib, defaults.memory_bytes),
            file_size_bytes: mib(l.file_size_mib, defaults.file_size_bytes),
            cpu_seconds: l.cpu_seconds.unwrap_or(defaults.cpu_seconds),
            cpu_weight: l.cpu_weight.unwrap_or(defaults.cpu_weight),
            cpu_max_millicores: l.cpu_max_millicores.or(defaults.cpu_max_millicores),
            disk_bytes: match l.disk_mib {
                Some(0) => None,
                Some(m) => Some(m.saturating_mul(1024 * 1024)),
                None => defaults.disk_bytes,
            },
            disk_reserve_bytes: mib(l.disk_reserve_mib, defaults.disk_reserve_bytes),
            io: IoLimits {
                read_bytes_per_second: limit(
                    l.io_read_mib_per_second
                        .map(|m| m.saturating_mul(1024 * 1024)),
                    defaults.io.read_bytes_per_second,
                ),
                write_bytes_per_second: limit(
                    l.io_write_mib_per_second
                        .map(|m| m.saturating_mul(1024 * 1024)),
                    defaults.io.write_bytes_per_second,
                ),
                read_iops: limit(l.io_read_iops, defaults.io.read_iops),
                write_iops: limit(l.io_write_iops, defaults.io.write_iops),
            },
        },
        cgroup_parent: l.cgroup_parent.clone(),
        network: network(l)?,
        images: l
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
                    (None, None) => return Err(format!("local.images.{name}: no `dir` or `oci`")),
                };
                Ok((name.clone(), source))
            })
            .collect::<Result<_, String>>()?,
        capacity: l.capacity.map(|c| {
            let root = l
                .root
                .clone()
                .unwrap_or_else(|| settings.data_dir.join("sandboxes"));
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
        init: Some(init),
        exec_threads: l
            .exec_threads
            .map_or(corral_provider_local::DEFAULT_EXEC_THREADS, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
        exec_queue_wait: l.exec_queue_wait_seconds.map_or(
            corral_provider_local::DEFAULT_EXEC_QUEUE_WAIT,
            std::time::Duration::from_secs,
        ),
    };
    let provider = LocalProvider::new(config).map_err(|e| e.to_string())?;
    if let Some(why) = provider.unavailable_reason() {
        tracing::warn!("provider `local` cannot run sandboxes on this machine: {why}");
    }
    Ok(Arc::new(provider))
}

/// Guarded networking, when `[local] network = true`.
fn network(l: &crate::config::LocalSection) -> Result<Option<NetworkConfig>, String> {
    if l.network != Some(true) {
        return Ok(None);
    }
    let allow = l
        .network_allow
        .iter()
        .flatten()
        .map(|r| r.parse().map_err(|e| format!("local.network_allow: {e}")))
        .collect::<Result<_, String>>()?;
    let dns_upstream = l
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

/// A configured limit: absent → the default, `0` → none.
fn limit(configured: Option<u64>, default: Option<u64>) -> Option<u64> {
    match configured {
        Some(0) => None,
        Some(n) => Some(n),
        None => default,
    }
}
