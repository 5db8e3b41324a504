//! One control group per sandbox: its limits hold for all of its commands together.
//!
//! Every command of sandbox `<id>` joins `<subtree>/<id>` before anything of the caller's
//! runs: `memory` (`memory.max`, swap off), `pids` (`pids.max`), `cpu` (`cpu.weight`, and
//! `cpu.max`) and, where the sandbox has a filesystem of its own, `io` (`io.max` on its loop
//! device). The group is made, with the current limits, by the sandbox's first command (and
//! again after the provider restarts: a dropped provider removes empty groups, so a changed
//! configuration applies then), and removed when the sandbox is deleted, after every process
//! in it is gone.
//!
//! The subtree is `corral` at the mount's root for a root server, or a subtree delegated to
//! the server's uid (`LocalConfig::cgroup_parent`, e.g. a systemd unit's own group with
//! `Delegate=yes`): that is how a server that is not root limits each sandbox as a whole.
//!
//! Two layouts are supported: the unified hierarchy (cgroup v2, `<mount>/<subtree>/<id>`,
//! with the controllers enabled in `cgroup.subtree_control` from the mount root down), and,
//! on hosts still on the legacy or hybrid layout (v1 controllers each mounted on their own,
//! as on this project's CI machine), `<controller mount>/<subtree>/<id>` in each of the
//! `memory`, `pids`, `cpu` and `blkio` hierarchies. Anything else (no root and no delegated
//! subtree, no memory or pids controller) is reported by [`Cgroups::detect`] and the provider
//! runs without cgroups: the per-process rlimits still apply.

use std::fs;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use snafu::{ResultExt as _, Snafu};

use crate::LocalLimits;

/// Name of the subtree that holds every sandbox's group.
const SUBTREE: &str = "corral";

#[derive(Debug, Snafu)]
pub(crate) enum Error {
    #[snafu(display("cannot write {value:?} to {}: {source}", path.display()))]
    Write {
        path: PathBuf,
        value: String,
        source: std::io::Error,
    },
    #[snafu(display("cannot create the cgroup {}: {source}", path.display()))]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[snafu(display("the cgroup {} still has processes after {waited:?}", path.display()))]
    Busy { path: PathBuf, waited: Duration },
}

/// Where the groups live.
#[derive(Debug, Clone)]
enum Layout {
    /// cgroup v2: `<mount>/<subtree>`.
    Unified {
        subtree: PathBuf,
        has_cpu: bool,
        has_io: bool,
    },
    /// cgroup v1: `<mount>/<subtree>` of each controller's hierarchy.
    Legacy {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
        blkio: Option<PathBuf>,
    },
}

/// The cgroups of every sandbox.
#[derive(Debug, Clone)]
pub(crate) struct Cgroups {
    layout: Layout,
    limits: LocalLimits,
    /// Memory and processes of each project's sandboxes together.
    project_caps: (u64, u64),
}

/// One sandbox's group (one directory per hierarchy).
#[derive(Debug, Clone)]
pub(crate) struct Group {
    dirs: Vec<PathBuf>,
    /// Below the subtree: `<id>`, or `project-<p>/<id>`.
    rel: PathBuf,
    /// Where its disk limits are written.
    io: Option<Io>,
}

/// A group's disk limits: v2 `io.max`, or the v1 `blkio.throttle.*` files of a directory.
#[derive(Debug, Clone)]
enum Io {
    Max(PathBuf),
    Throttle(PathBuf),
}

fn write(path: &Path, value: &str) -> Result<(), Error> {
    fs::write(path, value).context(WriteSnafu {
        path: path.to_owned(),
        value: value.to_owned(),
    })
}

fn mkdir(path: &Path) -> Result<(), Error> {
    match fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(Error::Create {
            path: path.to_owned(),
            source,
        }),
    }
}

/// cgroup mounts from `/proc/self/mountinfo`: (mount point, fs type, super options).
fn cgroup_mounts() -> Vec<(PathBuf, String, String)> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let point = left.split(' ').nth(4)?;
            let mut right = right.split(' ');
            let fstype = right.next()?;
            let options = right.nth(1).unwrap_or_default();
            (fstype == "cgroup2" || fstype == "cgroup").then(|| {
                (
                    PathBuf::from(point.replace("\\040", " ")),
                    fstype.to_owned(),
                    options.to_owned(),
                )
            })
        })
        .collect()
}

/// The subtree as a path relative to a cgroup mount: plain names only (a leading `/`, as
/// `/proc/self/cgroup` writes it, is dropped), never `..`.
fn relative(parent: &Path) -> Result<PathBuf, String> {
    let mut rel = PathBuf::new();
    for part in parent.components() {
        match part {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(name) => rel.push(name),
            _ => {
                return Err(format!(
                    "the cgroup parent {} must be a plain path below the cgroup mount",
                    parent.display()
                ));
            }
        }
    }
    if rel.as_os_str().is_empty() {
        return Err("the cgroup parent cannot be the cgroup root itself".into());
    }
    Ok(rel)
}

impl Cgroups {
    /// Finds a writable cgroup layout with the memory and pids controllers, and prepares the
    /// sandboxes' subtree in it; otherwise says why there is none. The subtree is `parent`
    /// (relative to the cgroup mount, in every v1 hierarchy alike), by default `corral` for
    /// a root server; a server that is not root needs a `parent` delegated to its uid.
    /// Before it is used, a short-lived child process is moved into a scratch group of the
    /// subtree and ends there: what a command's pid 1 needs, checked once at start.
    pub(crate) fn detect(limits: &LocalLimits, parent: Option<&Path>) -> Result<Self, String> {
        let subtree = match parent {
            Some(parent) => relative(parent)?,
            None if rustix::process::geteuid().is_root() => PathBuf::from(SUBTREE),
            None => {
                return Err(
                    "the server is not root, so it cannot create cgroups of its own; \
                            give it a subtree delegated to its uid (`cgroup_parent`)"
                        .into(),
                );
            }
        };
        let found = Self::find(limits, &subtree)?;
        found.check_join()?;
        Ok(found)
    }

    /// The same, with each project's sandboxes capped together at `memory` bytes and
    /// `processes`.
    pub(crate) fn with_project_caps(mut self, memory: u64, processes: u64) -> Self {
        self.project_caps = (memory, processes);
        self
    }

    fn find(limits: &LocalLimits, subtree: &Path) -> Result<Self, String> {
        let mounts = cgroup_mounts();
        let mut why = Vec::new();
        for (point, _, _) in mounts.iter().filter(|(_, t, _)| t == "cgroup2") {
            match Self::unified(point, subtree, limits) {
                Ok(found) => return Ok(found),
                Err(e) => why.push(format!("cgroup v2 at {}: {e}", point.display())),
            }
        }
        let legacy = |name: &str| {
            mounts
                .iter()
                .find(|(_, t, o)| t == "cgroup" && o.split(',').any(|o| o == name))
                .map(|(p, _, _)| p.join(subtree))
        };
        match (legacy("memory"), legacy("pids")) {
            (Some(memory), Some(pids)) => {
                for dir in [&memory, &pids] {
                    fs::create_dir_all(dir)
                        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                }
                // cpu and blkio are used where they can be (a delegation may leave them out).
                let optional =
                    |name| legacy(name).filter(|d: &PathBuf| fs::create_dir_all(d).is_ok());
                let (cpu, blkio) = (optional("cpu"), optional("blkio"));
                return Ok(Self {
                    layout: Layout::Legacy {
                        memory,
                        pids,
                        cpu,
                        blkio,
                    },
                    limits: *limits,
                    project_caps: (u64::MAX, u64::MAX),
                });
            }
            _ => why.push("no cgroup v1 hierarchies with memory and pids either".into()),
        }
        Err(why.join("; "))
    }

    fn unified(mount: &Path, subtree: &Path, limits: &LocalLimits) -> Result<Self, String> {
        let controllers = |dir: &Path| -> Result<Vec<String>, String> {
            fs::read_to_string(dir.join("cgroup.controllers"))
                .map(|s| s.split_whitespace().map(str::to_owned).collect())
                .map_err(|e| format!("cannot read cgroup.controllers: {e}"))
        };
        let wanted = ["memory", "pids", "cpu", "io"];
        // What the root lacks, no group below it has.
        let root = controllers(mount)?;
        if !["memory", "pids"]
            .iter()
            .all(|c| root.iter().any(|r| r == c))
        {
            return Err(format!(
                "the memory and pids controllers are not available (only `{}`)",
                root.join(" ")
            ));
        }
        // Controllers pass down one level at a time: each ancestor hands on what it has. A
        // root server enables them from the mount down; under delegation the owner of the
        // levels above has done so (a refused write is left to the check below).
        let mut dir = mount.to_path_buf();
        for part in subtree.components() {
            let have = controllers(&dir).unwrap_or_default();
            for c in wanted.iter().filter(|c| have.iter().any(|h| h == *c)) {
                let _ = write(&dir.join("cgroup.subtree_control"), &format!("+{c}"));
            }
            dir.push(part);
            if !dir.is_dir() {
                mkdir(&dir).map_err(|e| e.to_string())?;
            }
        }
        let available = controllers(&dir)?;
        let has = |c: &str| available.iter().any(|a| a == c);
        if !has("memory") || !has("pids") {
            return Err(format!(
                "the memory and pids controllers are not available in {} (only `{}`)",
                dir.display(),
                available.join(" ")
            ));
        }
        for c in wanted.iter().filter(|c| has(c)) {
            write(&dir.join("cgroup.subtree_control"), &format!("+{c}"))
                .map_err(|e| e.to_string())?;
        }
        Ok(Self {
            layout: Layout::Unified {
                subtree: dir,
                has_cpu: has("cpu"),
                has_io: has("io"),
            },
            limits: *limits,
            project_caps: (u64::MAX, u64::MAX),
        })
    }

    /// Moves a short-lived child into a scratch group and lets it end there: the server
    /// must be allowed to move its own processes into the subtree (under cgroup v2 it needs
    /// write access to `cgroup.procs` of the common ancestor too).
    fn check_join(&self) -> Result<(), String> {
        let scratch = format!(".probe-{}", std::process::id());
        let group = self.group(Path::new(&scratch));
        let result = (|| {
            for dir in &group.dirs {
                mkdir(dir).map_err(|e| e.to_string())?;
            }
            let mut child = std::process::Command::new("/bin/sleep")
                .arg("5")
                .spawn()
                .map_err(|e| format!("cannot start a process to check the cgroups: {e}"))?;
            let joined = group.join(child.id());
            let _ = child.kill();
            let _ = child.wait();
            joined.map_err(|e| format!("cannot move a process into the sandboxes' cgroups: {e}"))
        })();
        for dir in &group.dirs {
            let _ = fs::remove_dir(dir);
        }
        result
    }

    /// The controller disk limits go through, if there is one.
    pub(crate) fn io_controller(&self) -> Option<String> {
        match &self.layout {
            Layout::Unified { has_io: true, .. } => Some("cgroup v2 `io.max`".into()),
            Layout::Legacy { blkio: Some(_), .. } => Some(
                "cgroup v1 `blkio.throttle` (reads and direct or synced writes; not buffered \
                 writeback)"
                    .into(),
            ),
            _ => None,
        }
    }

    /// Which layout is in use, for logs and reports.
    pub(crate) fn describe(&self) -> String {
        match &self.layout {
            Layout::Unified { subtree, .. } => format!("cgroup v2 under {}", subtree.display()),
            Layout::Legacy {
                memory, cpu, blkio, ..
            } => format!(
                "cgroup v1 (memory, pids{}{}) under {}",
                if cpu.is_some() { ", cpu" } else { "" },
                if blkio.is_some() { ", blkio" } else { "" },
                memory.display()
            ),
        }
    }

    /// The group of sandbox `id` (a checked native id), inside its project's group when it
    /// counts against `project`. One that exists is used as it is; one that does not is
    /// made and given the current limits (removed again if that fails, so a group without
    /// its limits is never used); a project's group likewise, with the project's caps.
    /// Callers hold the sandbox's setup lock, so no process joins a group whose limits are
    /// still being written.
    ///
    /// `device` is the block device (major, minor) of the sandbox's own filesystem: its disk
    /// limits are written on every call, since the image may sit on another loop device
    /// than when the group was made (after a remount).
    pub(crate) fn prepare(
        &self,
        id: &str,
        project: Option<&str>,
        device: Option<(u32, u32)>,
    ) -> Result<Group, Error> {
        if let Some(project) = project {
            let parent = self.group(&project_dir(project));
            if !parent.dirs.iter().all(|d| d.is_dir()) {
                let (memory, processes) = self.project_caps;
                self.make(&parent, &Limits::cap(memory, processes))
                    .inspect_err(|_| remove_empty(&parent))?;
            }
        }
        let group = self.group(&sandbox_path(id, project));
        if !group.dirs.iter().all(|d| d.is_dir()) {
            self.make(&group, &Limits::sandbox(&self.limits))
                .inspect_err(|_| remove_empty(&group))?;
        }
        if let (Some(device), Some(io)) = (device, &group.io)
            && self.limits.io.any()
        {
            io.limit(device, &self.limits.io)?;
        }
        Ok(group)
    }

    /// Writes the server-wide caps (memory of every sandbox together, and their processes)
    /// on the subtree's own group. Best effort: under a delegated subtree those files belong
    /// to the delegating manager (systemd's `MemoryMax=`, `TasksMax=`), whose caps apply.
    pub(crate) fn cap_subtree(&self, memory: u64, processes: u64) -> Result<(), Error> {
        let top = self.group(Path::new(""));
        self.limit(&top, &Limits::cap(memory, processes))
    }

    fn make(&self, group: &Group, limits: &Limits) -> Result<(), Error> {
        for dir in &group.dirs {
            mkdir(dir)?;
        }
        self.limit(group, limits)
    }

    fn limit(&self, group: &Group, l: &Limits) -> Result<(), Error> {
        match &self.layout {
            Layout::Unified { has_cpu, .. } => {
                let Some(dir) = group.dirs.first() else {
                    return Ok(());
                };
                write(&dir.join("memory.max"), &or_max(l.memory, "max"))?;
                // Absent when the kernel has no swap accounting: then there is nothing to turn off.
                if dir.join("memory.swap.max").exists() {
                    write(&dir.join("memory.swap.max"), "0")?;
                }
                write(&dir.join("pids.max"), &or_max(l.processes, "max"))?;
                if let (true, Some((weight, max))) = (*has_cpu, l.cpu) {
                    write(&dir.join("cpu.weight"), &weight.to_string())?;
                    let max =
                        max.map_or_else(|| "max".to_owned(), |m| (m.max(1) * 100).to_string());
                    write(&dir.join("cpu.max"), &format!("{max} 100000"))?;
                }
            }
            Layout::Legacy {
                memory, pids, cpu, ..
            } => {
                let mem = memory.join(&group.rel);
                let bytes = or_max(l.memory, "-1");
                let limit = mem.join("memory.limit_in_bytes");
                let memsw = mem.join("memory.memsw.limit_in_bytes");
                // memsw must stay >= the limit: raising writes it first, lowering after.
                let _ = write(&limit, &bytes);
                if memsw.exists() {
                    write(&memsw, &bytes)?;
                }
                write(&limit, &bytes)?;
                let _ = write(&mem.join("memory.swappiness"), "0");
                write(
                    &pids.join(&group.rel).join("pids.max"),
                    &or_max(l.processes, "max"),
                )?;
                if let (Some(cpu), Some((weight, max))) = (cpu, l.cpu) {
                    let dir = cpu.join(&group.rel);
                    write(
                        &dir.join("cpu.shares"),
                        &(weight * 1024 / 100).max(2).to_string(),
                    )?;
                    write(&dir.join("cpu.cfs_period_us"), "100000")?;
                    let quota =
                        max.map_or_else(|| "-1".to_owned(), |m| (m.max(1) * 100).to_string());
                    write(&dir.join("cpu.cfs_quota_us"), &quota)?;
                }
            }
        }
        Ok(())
    }

    /// The group at `rel` below the subtree (in every hierarchy), whether or not it exists.
    fn group(&self, rel: &Path) -> Group {
        match &self.layout {
            Layout::Unified {
                subtree, has_io, ..
            } => {
                let dir = subtree.join(rel);
                Group {
                    io: has_io.then(|| Io::Max(dir.join("io.max"))),
                    dirs: vec![dir],
                    rel: rel.to_owned(),
                }
            }
            Layout::Legacy {
                memory,
                pids,
                cpu,
                blkio,
            } => Group {
                dirs: [Some(memory), Some(pids), cpu.as_ref(), blkio.as_ref()]
                    .into_iter()
                    .flatten()
                    .map(|d| d.join(rel))
                    .collect(),
                io: blkio.as_ref().map(|d| Io::Throttle(d.join(rel))),
                rel: rel.to_owned(),
            },
        }
    }

    /// Removes sandbox `id`'s group if no process is in it (it is made again by the next
    /// command), and its project's if that is empty too.
    pub(crate) fn remove_if_empty(&self, id: &str, project: Option<&str>) {
        remove_empty(&self.group(&sandbox_path(id, project)));
        if let Some(project) = project {
            remove_empty(&self.group(&project_dir(project)));
        }
    }

    /// Kills every process in sandbox `id`'s group, waits until they are gone, and removes
    /// the group (and its project's, if no other sandbox's is in it). Nothing to do when it
    /// does not exist.
    pub(crate) fn remove(
        &self,
        id: &str,
        project: Option<&str>,
        patience: Duration,
    ) -> Result<(), Error> {
        let group = self.group(&sandbox_path(id, project));
        let started = Instant::now();
        for dir in &group.dirs {
            if !dir.exists() {
                continue;
            }
            // cgroup v2 (5.14+) kills the whole group at once, forks in flight included.
            if dir.join("cgroup.kill").exists() {
                let _ = write(&dir.join("cgroup.kill"), "1");
            }
            loop {
                for pid in group_pids(dir) {
                    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                }
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                    Err(_) if started.elapsed() < patience => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => {
                        return Err(Error::Busy {
                            path: dir.clone(),
                            waited: started.elapsed(),
                        });
                    }
                }
            }
        }
        if let Some(project) = project {
            remove_empty(&self.group(&project_dir(project)));
        }
        Ok(())
    }
}

/// What a group is limited to.
struct Limits {
    memory: u64,
    processes: u64,
    /// Sandboxes only: CPU weight and cap (thousandths of a core).
    cpu: Option<(u64, Option<u64>)>,
}

impl Limits {
    fn sandbox(l: &LocalLimits) -> Self {
        Self {
            memory: l.memory_bytes,
            processes: l.max_processes,
            cpu: Some((l.cpu_weight.clamp(1, 10_000), l.cpu_max_millicores)),
        }
    }

    fn cap(memory: u64, processes: u64) -> Self {
        Self {
            memory,
            processes,
            cpu: None,
        }
    }
}

/// The directory of `project`'s group: `project-<name>` for a name of letters, digits, `-`
/// and `_` (at most 64), otherwise `project-<hash>`; never a path.
pub(crate) fn project_dir(project: &str) -> PathBuf {
    let plain = !project.is_empty()
        && project.len() <= 64
        && project
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        PathBuf::from(format!("project-{project}"))
    } else {
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(project.as_bytes());
        let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
        PathBuf::from(format!("project-{hex}"))
    }
}

/// Where sandbox `id`'s group sits below the subtree.
fn sandbox_path(id: &str, project: Option<&str>) -> PathBuf {
    match project {
        Some(p) => project_dir(p).join(id),
        None => PathBuf::from(id),
    }
}

/// `n`, or `unlimited` for `u64::MAX` (no cap).
fn or_max(n: u64, unlimited: &str) -> String {
    if n == u64::MAX {
        unlimited.to_owned()
    } else {
        n.to_string()
    }
}

fn remove_empty(group: &Group) {
    for dir in &group.dirs {
        let _ = fs::remove_dir(dir);
    }
}

impl Group {
    /// Moves process `pid` (a host pid) into the group, in every hierarchy.
    pub(crate) fn join(&self, pid: u32) -> Result<(), Error> {
        for dir in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }
}

fn group_pids(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

impl Io {
    /// Sets the group's limits on `device` (no limit where `io` has none).
    fn limit(&self, (major, minor): (u32, u32), io: &crate::IoLimits) -> Result<(), Error> {
        match self {
            Self::Max(file) => {
                let v =
                    |limit: Option<u64>| limit.map_or_else(|| "max".to_owned(), |n| n.to_string());
                write(
                    file,
                    &format!(
                        "{major}:{minor} rbps={} wbps={} riops={} wiops={}",
                        v(io.read_bytes_per_second),
                        v(io.write_bytes_per_second),
                        v(io.read_iops),
                        v(io.write_iops)
                    ),
                )
            }
            Self::Throttle(dir) => {
                // v1 has one file per kind; 0 removes a rule.
                for (name, limit) in [
                    ("read_bps_device", io.read_bytes_per_second),
                    ("write_bps_device", io.write_bytes_per_second),
                    ("read_iops_device", io.read_iops),
                    ("write_iops_device", io.write_iops),
                ] {
                    write(
                        &dir.join(format!("blkio.throttle.{name}")),
                        &format!("{major}:{minor} {}", limit.unwrap_or(0)),
                    )?;
                }
                Ok(())
            }
        }
    }
}
