//! What this host offers sandboxes, found once when the provider starts: whether a sandbox
//! runs here at all ([`probe`]), which parts of containment are available ([`Containment`])
//! and what every sandbox sees of the host (its system directories, the secrets masked).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::command::{self, Outcome, Run, RunError};
use crate::init::proto::{IdRange, SystemDir};
use crate::inits::{Init, InitProgram};
use crate::store::{self, Store};
use crate::{IDS_PER_SANDBOX, IoLimits, LocalCapacity, Template, WORKSPACE, cgroup, disk};

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
    /// Whether sandboxes may have a guarded network, or why not.
    pub network: std::result::Result<(), String>,
    /// The configured images that can be used, or why one cannot.
    pub images: std::result::Result<Vec<String>, Vec<String>>,
    /// The caps on what sandboxes hold together.
    pub capacity: LocalCapacity,
    /// Whether the server-wide memory and process caps are on the sandboxes' cgroup
    /// subtree, or why not (a delegated subtree's are its manager's to set).
    pub server_cgroup_caps: std::result::Result<(), String>,
}

impl Containment {
    /// Logs (warn) each part of containment that is missing, with its reason; the guarded
    /// network's only when one is configured.
    pub(crate) fn warn_missing(&self, network_configured: bool) {
        if let Err(why) = &self.cgroups {
            tracing::warn!(reason = %why, "local sandboxes run without cgroups: memory, processes and CPU are limited per process only");
        }
        if let Err(why) = &self.disk_quota {
            tracing::warn!(reason = %why, "local sandboxes have no disk quota");
        }
        if let Err(why) = &self.io {
            tracing::warn!(reason = %why, "local sandboxes have no disk bandwidth limit");
        }
        if let Err(why) = &self.seccomp {
            tracing::warn!(reason = %why, "local sandboxes run without a seccomp filter");
        }
        if let Err(why) = &self.server_cgroup_caps {
            tracing::warn!(reason = %why, "the server-wide memory and process caps of local sandboxes are not set here");
        }
        if let (true, Err(why)) = (network_configured, &self.network) {
            tracing::warn!(reason = %why, "local sandboxes cannot have a network");
        }
    }
}

/// The host directories every sandbox (without an image) sees read-only: `/usr`, `/etc`,
/// and `/bin`, `/sbin`, `/lib*` (symlinks into `/usr` on merged-/usr systems, resolved here:
/// each is a read-only mount of its own inside, which a command cannot remove or replace).
pub(crate) fn system_dirs() -> Vec<SystemDir> {
    ["usr", "etc", "bin", "sbin", "lib", "lib32", "lib64"]
        .into_iter()
        .filter_map(|name| {
            let source = std::fs::canonicalize(Path::new("/").join(name)).ok()?;
            source.is_dir().then(|| SystemDir {
                name: name.to_owned(),
                source,
            })
        })
        .collect()
}

/// How disk bandwidth is limited: on each sandbox's own loop device, through its cgroup.
pub(crate) fn io_containment(
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

/// Starts an init over a scratch root and runs `true` in it once: sandboxes either work
/// here or they do not. A seccomp filter that cannot be loaded here fails it too.
pub(crate) fn probe(
    store: &Store,
    program: &InitProgram,
    template: &Template,
    as_root: bool,
) -> std::result::Result<(), String> {
    let why = |e: String| format!("sandboxes cannot run on this machine: {e}");
    if !cfg!(target_os = "linux") {
        return Err(why("not Linux".into()));
    }
    let ids = as_root.then_some(IdRange {
        first: store::PROBE_UID,
        count: IDS_PER_SANDBOX,
    });
    let root = store
        .probe_root(ids.map(|r| r.first))
        .map_err(|e| why(format!("cannot prepare the probe sandbox: {e}")))?;
    let result = (|| {
        let control = root.with_file_name(store::CONTROL);
        let setup = template.setup(&root, ids, false, None, Some(control));
        let init = Init::start(program, &setup, None)?;
        let env = BTreeMap::new();
        let run = Run {
            command: "true",
            cwd: WORKSPACE,
            env: &env,
            timeout: Duration::from_secs(20),
            max_output_bytes: 4096,
            cpu_seconds: 10,
        };
        match command::run(&init, &run, None) {
            Ok(Outcome::Finished(out)) if out.exit_code == 0 => Ok(()),
            Ok(Outcome::Finished(out)) => Err(format!(
                "the probe command exited with {}: {}",
                out.exit_code,
                corral_provider::excerpt(&String::from_utf8_lossy(&out.stderr), 300)
            )),
            Ok(_) => Err("the probe command did not finish in 20 s".into()),
            Err(RunError::InitGone { why: e, .. } | RunError::Failed(e)) => Err(e),
        }
    })();
    store.remove_probe(&root);
    result.map_err(|e| why(corral_provider::excerpt(&e, 300)))
}

/// Files and directories under `dir` (recursively) that other users may not read but the
/// server's uid or gid may: secrets such as `/etc/shadow` or private keys. When the server is
/// not root, a sandbox runs as the server's uid and could read them through the read-only
/// bind of `/etc`; they are masked (in every mode, so sandboxes look the same). Those of
/// other owners stay unreadable inside anyway: the sandbox holds no capability over ids it
/// does not map.
pub(crate) fn unreadable_under(dir: &str) -> Vec<PathBuf> {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::from(dir)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            let mode = meta.permissions().mode();
            let ours = meta.uid() == uid || meta.gid() == gid;
            if meta.is_dir() {
                if mode & 0o005 != 0o005 {
                    if ours {
                        out.push(entry.path());
                    }
                } else {
                    stack.push(entry.path());
                }
            } else if meta.is_file() && mode & 0o004 == 0 && ours {
                out.push(entry.path());
            }
        }
    }
    out
}
