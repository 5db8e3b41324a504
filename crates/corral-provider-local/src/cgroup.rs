//! One control group per sandbox: its limits hold for all of its commands together.
//!
//! Every command of sandbox `<id>` joins `corral/<id>` before anything of the caller's runs:
//! `memory` (`memory.max`, swap off), `pids` (`pids.max`), `cpu` (`cpu.weight`, and
//! `cpu.max`). The group is made, with the current limits, by the sandbox's first command
//! (and again after the provider restarts: a dropped provider removes empty groups, so a
//! changed configuration applies then), and removed when the sandbox is deleted, after every
//! process in it is gone.
//!
//! Two layouts are supported: the unified hierarchy (cgroup v2, `<mount>/corral/<id>`, with
//! the controllers enabled in `cgroup.subtree_control` of the mount root and of `corral`),
//! and, on hosts still on the legacy or hybrid layout (v1 controllers each mounted on their
//! own, as on this project's CI machine), `<controller mount>/corral/<id>` in each of the
//! `memory`, `pids` and `cpu` hierarchies. Anything else (no root, no delegation, no memory
//! or pids controller) is reported by [`Cgroups::detect`] and the provider runs without
//! cgroups, as before: the per-process rlimits still apply.

use std::fs;
use std::path::{Path, PathBuf};
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
    /// cgroup v2: `<mount>/corral`.
    Unified { subtree: PathBuf, has_cpu: bool },
    /// cgroup v1: `<mount>/corral` of each controller's hierarchy.
    Legacy {
        memory: PathBuf,
        pids: PathBuf,
        cpu: Option<PathBuf>,
    },
}

/// The cgroups of every sandbox.
#[derive(Debug, Clone)]
pub(crate) struct Cgroups {
    layout: Layout,
    limits: LocalLimits,
}

/// One sandbox's group (one directory per hierarchy).
#[derive(Debug, Clone)]
pub(crate) struct Group {
    dirs: Vec<PathBuf>,
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

impl Cgroups {
    /// Finds a writable cgroup layout with the memory and pids controllers, and prepares the
    /// `corral` subtree in it; otherwise says why there is none.
    pub(crate) fn detect(limits: &LocalLimits) -> Result<Self, String> {
        if !rustix::process::geteuid().is_root() {
            return Err("the server is not root, so it cannot create cgroups".into());
        }
        let mounts = cgroup_mounts();
        let mut why = Vec::new();
        for (point, _, _) in mounts.iter().filter(|(_, t, _)| t == "cgroup2") {
            match Self::unified(point, limits) {
                Ok(found) => return Ok(found),
                Err(e) => why.push(format!("cgroup v2 at {}: {e}", point.display())),
            }
        }
        let legacy = |name: &str| {
            mounts
                .iter()
                .find(|(_, t, o)| t == "cgroup" && o.split(',').any(|o| o == name))
                .map(|(p, _, _)| p.join(SUBTREE))
        };
        match (legacy("memory"), legacy("pids")) {
            (Some(memory), Some(pids)) => {
                let cpu = legacy("cpu");
                for dir in [Some(&memory), Some(&pids), cpu.as_ref()]
                    .into_iter()
                    .flatten()
                {
                    mkdir(dir).map_err(|e| e.to_string())?;
                }
                return Ok(Self {
                    layout: Layout::Legacy { memory, pids, cpu },
                    limits: *limits,
                });
            }
            _ => why.push("no cgroup v1 hierarchies with memory and pids either".into()),
        }
        Err(why.join("; "))
    }

    fn unified(mount: &Path, limits: &LocalLimits) -> Result<Self, String> {
        let available = fs::read_to_string(mount.join("cgroup.controllers"))
            .map_err(|e| format!("cannot read cgroup.controllers: {e}"))?;
        let has = |c: &str| available.split_whitespace().any(|a| a == c);
        if !has("memory") || !has("pids") {
            return Err(format!(
                "the memory and pids controllers are not available (only `{}`)",
                available.trim()
            ));
        }
        let wanted: Vec<&str> = ["memory", "pids", "cpu"]
            .into_iter()
            .filter(|c| has(c))
            .collect();
        let enable = wanted
            .iter()
            .map(|c| format!("+{c}"))
            .collect::<Vec<_>>()
            .join(" ");
        let subtree = mount.join(SUBTREE);
        write(&mount.join("cgroup.subtree_control"), &enable).map_err(|e| e.to_string())?;
        mkdir(&subtree).map_err(|e| e.to_string())?;
        write(&subtree.join("cgroup.subtree_control"), &enable).map_err(|e| e.to_string())?;
        Ok(Self {
            layout: Layout::Unified {
                subtree,
                has_cpu: has("cpu"),
            },
            limits: *limits,
        })
    }

    /// Which layout is in use, for logs and reports.
    pub(crate) fn describe(&self) -> String {
        match &self.layout {
            Layout::Unified { subtree, .. } => format!("cgroup v2 under {}", subtree.display()),
            Layout::Legacy { memory, .. } => {
                format!("cgroup v1 (memory, pids, cpu) under {}", memory.display())
            }
        }
    }

    /// The group of sandbox `id` (a checked native id). One that exists is used as it is;
    /// one that does not is made and given the current limits (removed again if that
    /// fails, so a group without its limits is never used). Callers hold the sandbox's setup
    /// lock, so no command joins a group whose limits are still being written.
    pub(crate) fn prepare(&self, id: &str) -> Result<Group, Error> {
        let existing = self.group(id);
        if existing.dirs.iter().all(|d| d.is_dir()) {
            return Ok(existing);
        }
        self.make(id).inspect_err(|_| self.remove_if_empty(id))
    }

    fn make(&self, id: &str) -> Result<Group, Error> {
        let l = &self.limits;
        let weight = l.cpu_weight.clamp(1, 10_000);
        match &self.layout {
            Layout::Unified { subtree, has_cpu } => {
                let dir = subtree.join(id);
                mkdir(&dir)?;
                write(&dir.join("memory.max"), &l.memory_bytes.to_string())?;
                // Absent when the kernel has no swap accounting: then there is nothing to turn off.
                if dir.join("memory.swap.max").exists() {
                    write(&dir.join("memory.swap.max"), "0")?;
                }
                write(&dir.join("pids.max"), &l.max_processes.to_string())?;
                if *has_cpu {
                    write(&dir.join("cpu.weight"), &weight.to_string())?;
                    let max = l
                        .cpu_max_millicores
                        .map_or_else(|| "max".to_owned(), |m| (m.max(1) * 100).to_string());
                    write(&dir.join("cpu.max"), &format!("{max} 100000"))?;
                }
                Ok(Group { dirs: vec![dir] })
            }
            Layout::Legacy { memory, pids, cpu } => {
                let mem = memory.join(id);
                mkdir(&mem)?;
                let bytes = l.memory_bytes.to_string();
                let limit = mem.join("memory.limit_in_bytes");
                let memsw = mem.join("memory.memsw.limit_in_bytes");
                // memsw must stay >= the limit: raising writes it first, lowering after.
                let _ = write(&limit, &bytes);
                if memsw.exists() {
                    write(&memsw, &bytes)?;
                }
                write(&limit, &bytes)?;
                let _ = write(&mem.join("memory.swappiness"), "0");
                let pid_dir = pids.join(id);
                mkdir(&pid_dir)?;
                write(&pid_dir.join("pids.max"), &l.max_processes.to_string())?;
                let mut dirs = vec![mem, pid_dir];
                if let Some(cpu) = cpu {
                    let dir = cpu.join(id);
                    mkdir(&dir)?;
                    write(
                        &dir.join("cpu.shares"),
                        &(weight * 1024 / 100).max(2).to_string(),
                    )?;
                    write(&dir.join("cpu.cfs_period_us"), "100000")?;
                    let quota = l
                        .cpu_max_millicores
                        .map_or_else(|| "-1".to_owned(), |m| (m.max(1) * 100).to_string());
                    write(&dir.join("cpu.cfs_quota_us"), &quota)?;
                    dirs.push(dir);
                }
                Ok(Group { dirs })
            }
        }
    }

    /// The group of sandbox `id` as it would be named, whether or not it exists.
    fn group(&self, id: &str) -> Group {
        let dirs = match &self.layout {
            Layout::Unified { subtree, .. } => vec![subtree.join(id)],
            Layout::Legacy { memory, pids, cpu } => [Some(memory), Some(pids), cpu.as_ref()]
                .into_iter()
                .flatten()
                .map(|d| d.join(id))
                .collect(),
        };
        Group { dirs }
    }

    /// Removes sandbox `id`'s group if no process is in it (it is made again by the next
    /// command).
    pub(crate) fn remove_if_empty(&self, id: &str) {
        for dir in self.group(id).dirs {
            let _ = fs::remove_dir(dir);
        }
    }

    /// Kills every process in sandbox `id`'s group, waits until they are gone, and removes
    /// the group. Nothing to do when it does not exist.
    pub(crate) fn remove(&self, id: &str, patience: Duration) -> Result<(), Error> {
        let group = self.group(id);
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
        Ok(())
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
